"""Exit diagnosis (issue 21 item 1): log tails as the real binaries wrote them, classified by
the profiles' patterns into `NotReady` subclasses. Pure: no process."""

from __future__ import annotations

import pytest

from exedra_engine import (
    CPU,
    AddressUnavailable,
    ArgumentRefused,
    Config,
    Constraints,
    ExecutorInfo,
    ExitedUnexplained,
    Hardware,
    IllegalInstruction,
    KilledBySignal,
    Kind,
    LibraryNotLoaded,
    ModelNotLoaded,
    ModelSpec,
    NotReady,
    OutOfMemory,
    Override,
    explain_launch,
)
from exedra_engine._core.executors.builtin import LLAMA, WHISPER
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.launch.diagnosis import Exit, classify, exit_error, find_cause, layer_of
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.plan.provenance import Source
from exedra_engine._shell.launch.child import ExitReason

# Captured from llama-server 0.3.36 and whisper-server 1.8.5 built by install-executors.sh.
LLAMA_OOM = (
    "0.02.622.283 W llama_context: n_ctx_seq (10000128) > n_ctx_train (32768) -- possible "
    "training context overflow",
    "0.03.875.491 E ggml_aligned_malloc: insufficient memory (attempted to allocate 29297.25 MB)",
    "0.03.876.137 E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of "
    "size 30720393216",
    "0.03.876.179 E alloc_tensor_range: failed to allocate CPU buffer of size 30720393216",
    "0.04.008.331 E llama_init_from_model: failed to initialize the context: failed to "
    "allocate buffer for kv cache",
    "0.04.013.781 E cmn  common_init_: failed to create context with model '/m/g.gguf'",
    "0.04.014.438 E srv  llama_server: exiting due to model loading error",
)
LLAMA_BIND = (
    "0.00.071.571 E srv         start: couldn't bind HTTP server socket, hostname: "
    "127.0.0.1, port: 18997",
    "0.00.071.708 E srv  llama_server: exiting due to HTTP server error",
)
LLAMA_TRUNCATED = (
    "0.00.166.906 E llama_model_load: error loading model: tensor 'token_embd.weight' data "
    "is not within the file bounds, model is corrupted or incomplete",
    "0.00.169.530 E llama_model_load_from_file_impl: failed to load model",
    "0.00.088.291 E cmn  common_init_: failed to load model '/m/trunc.gguf'",
    "0.00.088.294 E srv    load_model: failed to load model, '/m/trunc.gguf'",
)
LLAMA_NO_BACKEND = (
    "0.00.024.986 E llama_model_load_from_file_impl: no backends are loaded. hint: use "
    "ggml_backend_load() or ggml_backend_load_all() to load a backend before calling this "
    "function",
    "0.00.025.080 E cmn  common_init_: failed to load model '/m/g.gguf'",
    "0.00.026.154 E srv  llama_server: exiting due to model loading error",
)
LD_SO = (
    "/x/llama-server: error while loading shared libraries: libllama-common.so.0: cannot "
    "open shared object file: No such file or directory",
)
WHISPER_STOI = (
    "load_backend: loaded CPU backend from /x/libggml-cpu-skylakex.so",
    "#4  0x00007f52d38a8e85 in std::terminate() () from /lib/x86_64-linux-gnu/libstdc++.so.6",
    "terminate called after throwing an instance of 'std::invalid_argument'",
    "  what():  stoi",
)


def _exit(log: tuple[str, ...], code: int = 1, sig: str = "") -> Exit:
    how = f"killed by {sig}" if sig else f"exit {code}"
    return Exit(
        command="llama-server", returncode=code, how=how, signal=sig, log=log, host="h", port=1
    )


def _diagnose(profile: ExecutorProfile, log: tuple[str, ...], **kw: object) -> NotReady:
    code = kw.pop("code", 1)
    sig = kw.pop("sig", "")
    found = find_cause(profile.exit_causes, log)
    return exit_error(_exit(log, code, sig), found, **kw)  # type: ignore[arg-type]


def test_refused_flag_names_flag_layer_and_suggestion() -> None:
    log = ("warning: no usable GPU found", "error: invalid argument: --ctx-szie")
    sources = (Source(what="arg", text="--ctx-szie 4096", layer="conf/10.yaml"),)
    err = _diagnose(LLAMA, log, layer=layer_of("--ctx-szie", sources), suggestion="--ctx-size")
    assert isinstance(err, ArgumentRefused)
    assert (err.flag, err.layer, err.suggestion) == ("--ctx-szie", "conf/10.yaml", "--ctx-size")
    first = str(err).splitlines()[0]
    assert first == err.cause
    assert "refused the argument --ctx-szie" in first and "did you mean --ctx-size?" in first
    assert err.log == list(log) and err.returncode == 1


def test_bad_value_names_flag_and_reason() -> None:
    err = _diagnose(LLAMA, ('error while handling argument "--ctx-size": stoi', "", "usage:"))
    assert isinstance(err, ArgumentRefused) and err.flag == "--ctx-size"
    assert "(stoi)" in err.cause


def test_whisper_bad_value_aborts_naming_no_flag() -> None:
    err = _diagnose(WHISPER, WHISPER_STOI, code=-6, sig="SIGABRT")
    assert isinstance(err, ArgumentRefused) and err.flag == ""
    assert "did not name" in err.cause


def test_out_of_memory_names_size_what_and_plan() -> None:
    mib = 1024 * 1024
    host = PlaceMemory(
        name="Host",
        total=600 * mib,
        parts=MemoryParts(weights=240 * mib, kv=48 * mib, other=312 * mib),
        reserved=0,
        reserved_parts=MemoryParts(),
    )
    err = _diagnose(LLAMA, LLAMA_OOM, memory=MemoryPlan(source="estimated", ctx=4096, host=host))
    assert isinstance(err, OutOfMemory)
    assert err.mib == pytest.approx(29297.25, abs=0.01) and err.what == "kv cache"
    assert err.planned_mib == 48
    assert "29,297 MiB for the kv cache" in err.cause
    assert "the plan expected 48 MiB for the KV cache at context 4096" in err.cause
    other = _diagnose(
        LLAMA, LLAMA_OOM[:3], memory=MemoryPlan(source="estimated", ctx=4096, host=host)
    )
    assert isinstance(other, OutOfMemory) and other.what == "" and other.planned_mib == 600


def test_address_model_library() -> None:
    bind = _diagnose(LLAMA, LLAMA_BIND)
    assert isinstance(bind, AddressUnavailable) and "127.0.0.1:18997" in bind.cause
    model = _diagnose(LLAMA, LLAMA_TRUNCATED)
    assert isinstance(model, ModelNotLoaded) and "not within the file bounds" in model.cause
    lib = _diagnose(LLAMA, LLAMA_NO_BACKEND)
    assert isinstance(lib, LibraryNotLoaded) and "no ggml backend" in lib.cause
    ld = _diagnose(LLAMA, LD_SO, code=127)
    assert isinstance(ld, LibraryNotLoaded) and "libllama-common.so.0" in ld.cause


def test_whisper_patterns_differ() -> None:
    bind = ("couldn't bind to server socket: hostname=127.0.0.1 port=18996",)
    assert isinstance(_diagnose(WHISPER, bind), AddressUnavailable)
    assert not isinstance(_diagnose(LLAMA, bind), AddressUnavailable)
    bad = (
        "whisper_model_load: invalid model data (bad magic)",
        "error: failed to initialize whisper context",
    )
    assert isinstance(_diagnose(WHISPER, bad), ModelNotLoaded)
    unknown = ("error: unknown argument: --bogus",)
    err = _diagnose(WHISPER, unknown)
    assert isinstance(err, ArgumentRefused) and err.flag == "--bogus"


def test_signals_and_the_unexplained() -> None:
    ill = _diagnose(LLAMA, ("loading",), code=-4, sig="SIGILL")
    assert isinstance(ill, IllegalInstruction) and "GGML_BACKEND_DL" in ill.cause
    killed = _diagnose(LLAMA, ("loading",), code=-9, sig="SIGKILL")
    assert isinstance(killed, KilledBySignal) and killed.signal == 9
    assert "killed by SIGKILL" in killed.cause
    other = _diagnose(LLAMA, ("all fine",), code=3)
    assert isinstance(other, ExitedUnexplained) and "(exit 3)" in other.cause


def test_messages_have_real_lines_only() -> None:
    err = _diagnose(LLAMA, LLAMA_OOM)
    assert "\\n" not in str(err)
    assert str(err).splitlines()[2:] == list(LLAMA_OOM)


@pytest.mark.parametrize(
    ("profile", "line"),
    [
        (LLAMA, "error: invalid argument: --api-kee=sk-live-abc123XYZ"),
        (WHISPER, "error: unknown argument: --api-kee=sk-live-abc123XYZ"),
    ],
)
def test_refused_inline_value_not_echoed(profile: ExecutorProfile, line: str) -> None:
    # Found by the review: a mistyped key flag in `--flag=value` form named the whole token as
    # the flag, so the key was printed, and the layer and did-you-mean were lost.
    log = ("warning: no usable GPU found", line)
    sources = (Source(what="arg", text="--api-kee=sk-live-abc123XYZ", layer="caller"),)
    found = find_cause(profile.exit_causes, log)
    assert found is not None
    flag = found.get("flag")
    assert flag == "--api-kee"
    err = exit_error(_exit(log), found, layer=layer_of(flag, sources), suggestion="--api-key")
    assert isinstance(err, ArgumentRefused)
    assert "sk-live" not in str(err)
    assert all("sk-live" not in entry for entry in err.log)
    assert err.flag == "--api-kee"
    assert "set by caller" in err.cause
    assert "did you mean --api-key?" in err.cause
    assert err.log[0] == "warning: no usable GPU found"


_HOST = Hardware(
    cpu=CPU(threads=8, ram=1 << 34),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
)
_QWEN = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=Kind.LLAMA)


@pytest.mark.parametrize("written", [("-c", "9"), ("--ctx-size", "9"), ("--ctx-size=9",)])
@pytest.mark.parametrize("named", ["-c", "--ctx-size", "--ctx-size=9"])
def test_a_refused_flags_layer_is_found_by_its_key(written: tuple[str, ...], named: str) -> None:
    # Whatever spelling the layer wrote and the executor named, the plan's provenance ties
    # both to the flag's key.
    con = Constraints(overrides=Config(models={"qwen": Override(args=written)}))
    sources = explain_launch(_QWEN, _HOST, con).unwrap().sources
    # as llama-server words each: a bad value of a separate one, an inline one it cannot cut
    inline = "=" in named
    log = (
        f"error: invalid argument: {named}"
        if inline
        else f'error while handling argument "{named}": stoi',
    )
    err = classify(_exit(log), LLAMA, lambda _: "", sources=sources)
    assert isinstance(err, ArgumentRefused) and err.flag == named.partition("=")[0]
    assert err.layer == "config models.qwen"
    assert "set by config models.qwen" in err.cause
    assert layer_of(named, sources, LLAMA.flags) == "config models.qwen"


def test_a_refused_flag_set_by_its_variable_names_that_layer() -> None:
    sources = (
        explain_launch(_QWEN, _HOST, Constraints(extra_env=("LLAMA_ARG_CTX_SIZE=x",)))
        .unwrap()
        .sources
    )
    assert layer_of("--ctx-size", sources, LLAMA.flags) == "caller"
    # a flag no layer set is the engine's, or nobody's
    assert layer_of("--port", sources, LLAMA.flags) == "engine"
    assert layer_of("--temp", sources, LLAMA.flags) == ""


def test_an_unknown_flag_is_found_by_its_spelling() -> None:
    con = Constraints(extra_args=("--ctx-szie", "64", "--zz=1"))
    sources = explain_launch(_QWEN, _HOST, con).unwrap().sources
    assert layer_of("--ctx-szie", sources, LLAMA.flags) == "caller"
    assert layer_of("--zz=1", sources, LLAMA.flags) == "caller"
    assert layer_of("--ctx-sz", sources, LLAMA.flags) == ""


def test_a_requested_stop_is_said_in_words_not_a_method_name() -> None:
    assert ExitReason(returncode=0, requested=True).describe() == "exit 0 after a stop request"
    assert ExitReason(returncode=-9, requested=True).describe() == (
        "killed by SIGKILL after a stop request"
    )
    assert ExitReason(returncode=1, requested=False).describe() == "exit 1"


def test_whisper_unknown_argument_then_usage_and_exit_0_is_a_refused_argument() -> None:
    # whisper-server 1.8.5: the error line, then its whole usage (~70 lines), then exit 0.
    from exedra_engine._core.launch.logs import TAIL_LINES, LogLines

    usage = [f"  -x{i},  --option-{i} N   [{i}] what option {i} does" for i in range(70)]
    lines = LogLines(())
    lines.feed(("error: unknown argument: --temp\n" + "\n".join(usage) + "\n").encode())
    assert "error: unknown argument: --temp" not in lines.tail  # scrolled out of the tail
    kept = lines.kept()
    assert kept[0] == "error: unknown argument: --temp" and len(kept) == TAIL_LINES + 1
    err = _diagnose(WHISPER, kept, code=0)
    assert isinstance(err, ArgumentRefused) and err.flag == "--temp"
    assert "(exit 0)" in err.cause and "refused the argument --temp" in err.cause
    assert err.log[0] == "error: unknown argument: --temp"  # the printed tail shows it


def test_only_the_first_error_lines_are_kept_beyond_the_tail() -> None:
    from exedra_engine._core.launch.logs import FIRST_ERRORS, TAIL_LINES, LogLines

    lines = LogLines(())
    lines.feed(b"".join(b"error %d\n" % i for i in range(100)))
    kept = lines.kept()
    assert kept[:FIRST_ERRORS] == tuple(f"error {i}" for i in range(FIRST_ERRORS))
    assert len(kept) == FIRST_ERRORS + TAIL_LINES
    short = LogLines(())
    short.feed(b"error: once\nfine\n")
    assert short.kept() == ("error: once", "fine")  # in the tail: not repeated
