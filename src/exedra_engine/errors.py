"""Typed errors: one class per failure a caller may want to tell apart.

Inside the library they are raised; the public functions return them as `returns` `Failure`
values (`exedra_engine._core.outcome`), and the command line maps each class to its exit
status in one table (`exedra_engine.cli.EXIT_STATUS`). Messages say what went wrong and where
(file, line, flag) and never contain an API key.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error this library reports."""

    @property
    def message(self) -> str:
        """The human-readable explanation."""
        return str(self)


class UnsupportedKind(EngineError):
    """The executor kind is not one this library knows."""


class ExecutorNotFound(EngineError):
    """No executor binary of the requested kind is installed."""


class NoHardware(EngineError):
    """No hardware snapshot was given to the planner."""


class NotReady(EngineError):
    """The executor exited or timed out before its readiness path answered.

    Every early exit is one of the subclasses below, so ``except NotReady`` catches them all
    and ``except OutOfMemory`` one of them. `cause` is the first line of the message, `log`
    the executor's last lines (secrets redacted), `returncode` its exit status (minus the
    signal number; None when it did not exit)."""

    kind = "not-ready"
    """A stable name for the class (the CLI's ``--json`` error ``kind``)."""

    def __init__(
        self,
        message: str,
        *,
        cause: str = "",
        returncode: int | None = None,
        log: list[str] | tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.cause = cause or message.partition("\n")[0]
        self.returncode = returncode
        self.log = list(log)


class ArgumentRefused(NotReady):
    """The executor refused an argument: unknown, removed, or a bad value. `flag` names it
    ("" when the executor does not say), `layer` the plan's layer that set it ("" unknown),
    `suggestion` the installed binary's closest flag ("" none)."""

    kind = "argument-refused"
    flag = ""
    layer = ""
    suggestion = ""


class OutOfMemory(NotReady):
    """An allocation failed while loading: `mib` its size (None when not stated), `what` it
    was for (``kv cache``, ``weights``, ``compute``, "" unknown), `planned_mib` the plan's
    own figure for that place (None without one)."""

    kind = "out-of-memory"
    mib: float | None = None
    what = ""
    planned_mib: float | None = None


class AddressUnavailable(NotReady):
    """The executor could not bind its address (the port is in use, or the address is not
    one of this host's)."""

    kind = "address-unavailable"


class ModelNotLoaded(NotReady):
    """The executor could not load the model: not a model file, an architecture it does not
    know, a missing projector, a truncated file."""

    kind = "model-not-loaded"


class LibraryNotLoaded(NotReady):
    """A shared library or a backend plugin of the executor could not be loaded."""

    kind = "library-not-loaded"


class IllegalInstruction(NotReady):
    """The executor died of SIGILL: built for CPU instructions this machine lacks."""

    kind = "illegal-instruction"


class KilledBySignal(NotReady):
    """The executor was ended by a signal before it was ready (`signal`: its number)."""

    kind = "signal"
    signal = 0


class ExitedUnexplained(NotReady):
    """The executor exited before it was ready, with no cause recognisable in its log."""

    kind = "exited"


class ReadyTimeout(NotReady):
    """The ready path did not answer within the load budget."""

    kind = "timeout"


class LoadStalled(NotReady):
    """The executor wrote nothing for the stall time while not ready: a hung load."""

    kind = "stalled"


class NotGGUF(EngineError):
    """The model file is not a readable GGUF file."""


class NoEndpoint(EngineError):
    """The merged args and env set no listen address."""


class ConfigError(EngineError):
    """An override file is unreadable, malformed or ill-typed.

    `file`, `line` and `path` say where, when that is known ("", 0, "" otherwise): the
    message already names them; these are for tools that annotate the file."""

    def __init__(self, message: str, *, file: str = "", line: int = 0, path: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.path = path


class PlanError(EngineError):
    """The request cannot be planned as given (a flag without its value, a capability the kind
    cannot serve, a model of another architecture, an API key for an executor without one)."""


class PortInUse(EngineError):
    """An explicitly requested port is already taken (ports are never moved silently)."""


class LaunchError(EngineError):
    """The executor process could not be started at all."""


class HardwareFileError(EngineError):
    """A hardware file (the output of ``exedra-engine probe --json``) is unreadable or does not
    describe a host: the message names the file and the field."""


class EmitError(EngineError):
    """A plan cannot be rendered for a target as asked (a loopback bind in a container, a
    secret that would have to be written into the output, a GPU whose resource is unknown)."""


class EmitRefused(EmitError):
    """Emitted files that the emitter's own checks reject: `problems` holds one line each."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class ModelUnreadable(EngineError):
    """The model path is missing, a directory, or cannot be read."""


class DoesNotFit(PlanError):
    """The plan's executor would not fit the host's usable memory or a device's free memory
    (an explicit context, prompt cache or placement too large): the message names what is
    needed, what is there, and the biggest part."""


class MeasureError(EngineError):
    """The executor's own memory measurement (``llama-fit-params``) could not be made: the
    binary is missing, failed, timed out, or printed something that is not its figures."""


class MemberFailed(EngineError):
    """One member of a group could not start, so none was left running (a group starts all
    or nothing): `member` names it, `cause` is its own error (also the ``__cause__``), e.g. a
    `NotReady` subclass."""

    def __init__(self, member: str, cause: EngineError) -> None:
        first = str(cause).partition("\n")[0]
        super().__init__(f"group member {member!r} failed: {first}")
        self.member = member
        self.cause = cause

    @property
    def kind(self) -> str:
        """The cause's stable name (`NotReady.kind`), or ``"member-failed"``."""
        return str(getattr(self.cause, "kind", "member-failed"))
