"""A group's ``logs=``: what each member's lines are sent to, tagged with its id.

Every group launcher (trio, asyncio, blocking) takes one ``logs`` for the whole group, in
one of these shapes, checked before anything starts (`member_logs`):

- ``None``: the lines are dropped (the last ones still explain a failure);
- a stream (a text or binary file, a trio ``SendStream``, an asyncio ``StreamWriter``):
  every line is written prefixed with its member's id, ``chat: <line>``;
- a callable: called as ``logs(member_id, line)`` for each line (text, its newline
  removed), on the adapter's own thread (trio's, the asyncio loop's), one line at a time;
  it must return quickly. A callable that cannot take those two arguments
  (``logs=lines.append``) is refused with `TypeError`;
- a mapping from member id to one of the single-launch sinks: each member's lines go to
  its own sink untagged (a member it does not name: dropped).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Final

_STREAM_METHODS: Final = ("write", "send_all")


class MemberLogs:
    """One member's share of a group's ``logs``: its lines tagged with its id (on a
    stream), or handed to a callable with it. `exedra_engine._shell.launch.loop.write_logs`
    unwraps it."""

    def __init__(self, member: str, sink: object) -> None:
        self.member = member
        self.sink = sink
        self._prefix = member.encode("utf-8", errors="replace") + b": "

    @property
    def calls(self) -> bool:
        """Whether the sink is a callable (else a stream)."""
        return not _is_stream(self.sink)

    def tagged(self, data: bytes) -> bytes:
        """`data` (whole lines) with every line prefixed by ``id: ``."""
        return b"".join(self._prefix + line for line in data.splitlines(keepends=True))

    def call(self, data: bytes) -> None:
        """Each line of `data` handed to the callable, as ``(member_id, line)``."""
        fn: Callable[[str, str], object] = self.sink  # type: ignore[assignment]
        for line in data.decode("utf-8", errors="replace").splitlines():
            fn(self.member, line)


def _is_stream(sink: object) -> bool:
    return any(callable(getattr(sink, m, None)) for m in _STREAM_METHODS)


def member_logs(ids: Sequence[str], logs: object) -> dict[str, object]:
    """Each member's sink, from a group's ``logs`` (the shapes above); `TypeError` for a
    shape the members' lines cannot be given to, before anything is started."""
    if logs is None:
        return dict.fromkeys(ids)
    if isinstance(logs, Mapping):
        unknown = sorted(str(k) for k in logs if k not in ids)
        if unknown:
            raise TypeError(
                f"logs: {', '.join(map(repr, unknown))} is no member of the group "
                f"(members: {', '.join(ids)})"
            )
        return {i: logs.get(i) for i in ids}
    if not _is_stream(logs):
        if not callable(logs):
            raise TypeError(
                f"logs: expected a file, a stream, a callable (member_id, line) or a mapping "
                f"of member ids to sinks, not {type(logs).__name__}"
            )
        _check_callable(logs)
    return {i: MemberLogs(i, logs) for i in ids}


def _check_callable(fn: Callable[..., object]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a callable whose signature cannot be read is taken at its word
    try:
        sig.bind("member", "line")
    except TypeError:
        raise TypeError(
            f"logs: a group calls logs(member_id, line) for each line, and {fn!r} does not "
            "take those two arguments; for a list, logs=lambda member, line: "
            "lines.append(f'{member}: {line}')"
        ) from None
