"""A FastAPI application that serves completions and speech-to-text from two models it
launches itself, planned together as a group: a llama-server and a whisper-server.

Both executors are planned on this host with `plan_group_on_host` (their memory shares sum
within the budget, each gets its own CPUs and port), started together in the application's
lifespan with the asyncio group launcher, `aio.open_group` (all or nothing: if one cannot
start, the other is stopped and the startup fails), and stopped together when the application
shuts down: Ctrl-C on uvicorn, SIGTERM from a supervisor, or a failed start all leave no
process behind. Run it with::

    EXEDRA_MODEL=/path/to/model.gguf EXEDRA_WHISPER_MODEL=/path/to/ggml-base.en.bin \\
        uvicorn --app-dir examples fastapi_group_app:app

then ask it:

- ``curl -H 'Content-Type: application/json' -d '{"prompt": "The capital of France is the
  city of"}' localhost:8000/complete``: the llama model continues the text;
- ``curl -H 'Content-Type: audio/wav' --data-binary @audio.wav localhost:8000/transcribe``:
  the whisper model transcribes a WAV file (16 kHz mono), ``{"text": "..."}``.

The chat model is reached only by this application (a fresh API key each start, loopback);
whisper-server takes no key, so it listens on loopback only. The admin's overrides are merged
as for any plan: ``$EXEDRA_CONFIG``, else ``/etc/exedra/engine.d`` (absent: none). FastAPI,
uvicorn and httpx are not dependencies of exedra-engine: install them yourself.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

import exedra_engine as engine
from exedra_engine import aio


def group_plan() -> engine.GroupPlan:
    """The group of the two models named by $EXEDRA_MODEL and $EXEDRA_WHISPER_MODEL, planned
    together on this host's hardware, with the admin's overrides as a layer of each."""
    chat = engine.GroupMember(
        spec=engine.ModelSpec(id="chat", path=os.environ["EXEDRA_MODEL"], kind=engine.Kind.LLAMA),
        constraints=engine.Constraints(
            ctx=int(os.environ.get("EXEDRA_CTX", "2048")), api_key=secrets.token_urlsafe()
        ),
    )
    asr = engine.GroupMember(
        spec=engine.ModelSpec(
            id="asr", path=os.environ["EXEDRA_WHISPER_MODEL"], kind=engine.Kind.TRANSCRIBE
        )
    )
    cfg = engine.load_config(os.environ.get("EXEDRA_CONFIG") or engine.DEFAULT_CONFIG_PATH)
    hw = engine.probe().unwrap()
    shared = engine.Constraints(overrides=cfg.unwrap())
    return engine.plan_group_on_host((chat, asr), hw, shared).unwrap()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Leaving this block (the server shuts down, or startup fails after the launch) stops
    # both executors in parallel and waits until their process groups are gone.
    async with aio.open_group(group_plan(), logs=sys.stderr, ready_timeout=300) as running:
        chat, asr = running["chat"].endpoint, running["asr"].endpoint
        headers = {"Authorization": f"Bearer {chat.api_key}"}
        async with (
            httpx.AsyncClient(base_url=chat.url, headers=headers, timeout=120) as chat_client,
            httpx.AsyncClient(base_url=asr.url, timeout=120) as asr_client,
        ):
            app.state.chat, app.state.asr = chat_client, asr_client
            yield


app = FastAPI(lifespan=lifespan)


class Prompt(BaseModel):
    prompt: str
    max_tokens: int = 8


class Answer(BaseModel):
    answer: str


class Transcript(BaseModel):
    text: str


@app.post("/complete")
async def complete(p: Prompt) -> Answer:
    """Continue `prompt` (greedily, to the end of its sentence) with the llama model."""
    body = {"prompt": p.prompt, "max_tokens": p.max_tokens, "temperature": 0, "stop": ["."]}
    r = await app.state.chat.post("/v1/completions", json=body)
    if r.status_code != 200:
        raise HTTPException(status_code=502, detail=f"the chat model answered {r.status_code}")
    return Answer(answer=r.json()["choices"][0]["text"])


@app.post("/transcribe")
async def transcribe(request: Request) -> Transcript:
    """Transcribe the WAV file in the request's body with the whisper model (the body is
    read whole: no form parsing, so no python-multipart)."""
    audio = await request.body()
    if not audio:
        raise HTTPException(status_code=400, detail="send a WAV file as the request's body")
    files = {"file": ("audio.wav", audio, "audio/wav")}
    r = await app.state.asr.post("/inference", files=files, data={"response_format": "json"})
    if r.status_code != 200:
        raise HTTPException(status_code=502, detail=f"the speech model answered {r.status_code}")
    return Transcript(text=r.json()["text"])
