"""A FastAPI application that serves chat and completions from a model it launches itself.

The model's executor (llama-server) is started in the application's lifespan with the
asyncio launcher, reached only by this application (a fresh API key each start, loopback),
and stopped when the application shuts down: Ctrl-C on uvicorn, SIGTERM from a supervisor,
or a failed start all leave no process behind. Run it with::

    EXEDRA_MODEL=/path/to/model.gguf uvicorn --app-dir examples fastapi_app:app

then ask it, with ``-H 'Content-Type: application/json'``:

- ``curl -d '{"prompt": "The capital of France is the city of"}' localhost:8000/complete``:
  a base model (one without a chat template, such as the Gemma 3 270M that ``./dev test``
  fetches; ``exedra-engine inspect`` says which) continues text: ``{"answer": " Paris"}``;
- ``curl -d '{"message": "Say hi."}' localhost:8000/chat``: an instruction-tuned model with a
  chat template answers a message.

The admin's overrides are merged as for any plan: ``$EXEDRA_CONFIG``, else
``/etc/exedra/engine.d`` (absent: none). FastAPI, uvicorn and httpx are not dependencies of
exedra-engine: install them yourself.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import exedra_engine as engine
from exedra_engine import aio


def model_plan() -> engine.LaunchPlan:
    """The plan for the model named by $EXEDRA_MODEL, on this host's hardware, with the
    admin's overrides ($EXEDRA_CONFIG, else the default directory) as a layer."""
    spec = engine.ModelSpec(id="chat", path=os.environ["EXEDRA_MODEL"], kind=engine.Kind.LLAMA)
    hw = engine.probe().unwrap()
    cfg = engine.load_config(os.environ.get("EXEDRA_CONFIG") or engine.DEFAULT_CONFIG_PATH)
    ctx = int(os.environ.get("EXEDRA_CTX", "2048"))
    con = engine.Constraints(ctx=ctx, api_key=secrets.token_urlsafe(), overrides=cfg.unwrap())
    return engine.plan(spec, hw, con).unwrap()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Leaving this block (the server shuts down, or startup fails after the launch) stops
    # the executor and waits until its process group is gone.
    async with aio.open_instance(model_plan(), logs=sys.stderr, ready_timeout=300) as inst:
        headers = {"Authorization": f"Bearer {inst.endpoint.api_key}"}
        async with httpx.AsyncClient(
            base_url=inst.endpoint.url, headers=headers, timeout=120
        ) as client:
            app.state.model = client
            yield


app = FastAPI(lifespan=lifespan)


class Question(BaseModel):
    message: str
    max_tokens: int = 64


class Prompt(BaseModel):
    prompt: str
    max_tokens: int = 8


class Answer(BaseModel):
    answer: str


@app.post("/chat")
async def chat(q: Question) -> Answer:
    """Forward one user message to the model, return its reply."""
    body = {"messages": [{"role": "user", "content": q.message}], "max_tokens": q.max_tokens}
    r = await app.state.model.post("/v1/chat/completions", json=body)
    if r.status_code != 200:
        raise HTTPException(status_code=502, detail=f"the model answered {r.status_code}")
    return Answer(answer=r.json()["choices"][0]["message"]["content"])


@app.post("/complete")
async def complete(p: Prompt) -> Answer:
    """Continue `prompt` (greedily, to the end of its sentence): what a base model does."""
    body = {"prompt": p.prompt, "max_tokens": p.max_tokens, "temperature": 0, "stop": ["."]}
    r = await app.state.model.post("/v1/completions", json=body)
    if r.status_code != 200:
        raise HTTPException(status_code=502, detail=f"the model answered {r.status_code}")
    return Answer(answer=r.json()["choices"][0]["text"])
