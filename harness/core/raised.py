"""Where a user's code failed: an exception's printable text and the frame that raised it.

Shared by the places that report a backend's failure (loading it, running it), so both name the
same frame: the innermost one in the user's own code, skipping Python's and installed libraries'
frames (wandb, once imported, wraps `sys.exit`, and the import machinery sits above any module
that fails to load) unless the traceback holds nothing else.
"""

from __future__ import annotations

import sysconfig
import traceback
from collections.abc import Sequence
from functools import cache


def exception_text(exc: BaseException) -> str:
    """``str(exc)`` (a SyntaxError's bare message), or a stand-in when the exception cannot even be printed."""
    try:
        return exc.msg if isinstance(exc, SyntaxError) else str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not replace the user's failure with ours
        return f"<{type(exc).__name__} whose str() raised>"


@cache
def _installed() -> tuple[str, ...]:
    return tuple(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib"))


def raising_frame(exc: BaseException, *, skip: Sequence[str] = ()) -> traceback.FrameSummary | None:
    """The innermost frame of `exc` in the user's code; frames in files under `skip` never count.

    A SyntaxError names the file and line of the bad source instead (its traceback is the importer's).
    """
    if isinstance(exc, SyntaxError) and exc.filename:
        return traceback.FrameSummary(exc.filename, exc.lineno or 0, "<module>")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not f.filename.startswith(tuple(skip))]
    own = [f for f in frames if not f.filename.startswith(_installed())]
    return (own or frames or [None])[-1]


__all__ = ["exception_text", "raising_frame"]
