"""`raising_frame` names the user's own frame: not the import machinery's, not an installed library's wrapper."""

from __future__ import annotations

import inspect
import sys

import pytest

from compactsim.harness.core.raised import exception_text, raising_frame


def _fails() -> None:
    raise ValueError("mine")


def test_the_frame_is_the_raising_line_of_the_users_code():
    with pytest.raises(ValueError) as info:
        _fails()
    frame = raising_frame(info.value)
    assert (frame.name, frame.lineno) == ("_fails", inspect.getsourcelines(_fails)[1] + 1)


def test_frames_under_skip_and_installed_libraries_never_count():
    def call_stdlib() -> None:
        import json

        json.loads("{")  # raises inside the standard library's json decoder

    with pytest.raises(ValueError) as info:
        call_stdlib()
    assert raising_frame(info.value).name == "call_stdlib"
    assert raising_frame(info.value, skip=(__file__,)) is not None  # only installed frames left: the innermost
    assert raising_frame(info.value, skip=(__file__,)).filename.startswith(sys.base_prefix)


def test_a_syntax_error_names_the_bad_source_and_its_bare_message():
    with pytest.raises(SyntaxError) as info:
        compile("def f(:\n", "broken.py", "exec")
    frame = raising_frame(info.value)
    assert (frame.filename, frame.lineno) == ("broken.py", 1)
    assert exception_text(info.value) == "invalid syntax"


def test_an_exception_that_cannot_be_printed_gets_a_stand_in():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert exception_text(Unprintable()) == "<Unprintable whose str() raised>"
    assert raising_frame(Unprintable()) is None  # never raised: no traceback
