"""A deterministic, reversible byte-level tokenizer with special tokens and no merges.

Vocabulary (`VOCAB_SIZE` = 288 ids)::

    0..31    special tokens (`SPECIAL_TOKENS`, e.g. `<|turn_start|>`, `<think>`, `<|image|>`)
    32..287  one token per byte value: id = `BYTE_OFFSET` + byte

There are no merges: text is UTF-8 encoded and every byte becomes exactly one token, so
tokenizing a concatenation equals concatenating the tokenizations. This is what makes the
chat template append-compatible (see `compactsim.harness.core.chat_template`).

Two layers, both exact:

- `encode_text(text)` / `decode_text(ids)`: plain text, never special tokens. User text that
  *spells* `<think>` stays bytes, so text cannot inject structure. Bytes that are not valid
  UTF-8 decode to lone surrogates U+DC80..U+DCFF (Python's ``surrogateescape``) and encode back
  to the same bytes, so ``encode_text(decode_text(ids)) == ids`` for every special-free id
  sequence.
- `encode(s)` / `decode(ids)`: any id sequence. Special token *k* decodes to the single lone
  high surrogate U+D800+k, which no text can contain (`encode_text` rejects surrogates other than
  the escape range), so every id sequence decodes to a unique string and
  ``encode(decode(ids)) == ids`` for **every** id sequence.

For people, `token_repr(id)` / `describe(ids)` give readable strings (`<think>`, `a`, `<0xC3>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compactsim.harness.core.errors import ConfigError

#: Special tokens in id order. Reserved slots keep ids stable if specials are added later.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|pad|>",  # 0  padding in training batches
    "<|bos|>",  # 1  first token of every rendered conversation
    "<|eos|>",  # 2  end of document (not used by the chat template)
    "<|turn_start|>",  # 3  opens a turn; followed by a role token
    "<|turn_end|>",  # 4  closes a turn; the assistant's stop token
    "<|system|>",  # 5  role: system / developer
    "<|user|>",  # 6  role: user
    "<|assistant|>",  # 7  role: assistant
    "<|tool|>",  # 8  role: tool (function_call_output)
    "<think>",  # 9  opens a reasoning block
    "</think>",  # 10 closes a reasoning block
    "<|tool_call|>",  # 11 opens a function call: name bytes follow
    "<|tool_args|>",  # 12 separates the name from the JSON argument bytes
    "<|/tool_call|>",  # 13 closes a function call
    "<|tool_response|>",  # 14 opens a tool output
    "<|/tool_response|>",  # 15 closes a tool output
    "<|image|>",  # 16 one image patch placeholder (IMAGE_PATCH_TOKENS per image)
    "<|turn_sep|>",  # 17 only produced by the `merge` drift mode: <|turn_end|><|turn_start|>
) + tuple(f"<|reserved_{i}|>" for i in range(18, 32))

NUM_SPECIAL: int = 32
BYTE_OFFSET: int = NUM_SPECIAL
VOCAB_SIZE: int = BYTE_OFFSET + 256

PAD, BOS, EOS, TURN_START, TURN_END = 0, 1, 2, 3, 4
ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL = 5, 6, 7, 8
THINK_START, THINK_END = 9, 10
TOOL_CALL_START, TOOL_ARGS, TOOL_CALL_END = 11, 12, 13
TOOL_RESPONSE_START, TOOL_RESPONSE_END = 14, 15
IMAGE = 16
TURN_SEP = 17

#: Placeholder tokens per image, whatever its size (the policy pools pixels to a 2x2 patch grid).
IMAGE_PATCH_TOKENS: int = 4

_SPECIAL_ID: dict[str, int] = {name: i for i, name in enumerate(SPECIAL_TOKENS)}
_SURROGATE_SPECIAL_BASE = 0xD800  # special k <-> chr(0xD800 + k)
_ESCAPE_LO, _ESCAPE_HI = 0xDC80, 0xDCFF  # surrogateescape range (raw non-UTF-8 bytes)

assert len(SPECIAL_TOKENS) == NUM_SPECIAL, "SPECIAL_TOKENS must fill every special slot"


def is_special(token_id: int) -> bool:
    """True for ids 0..31."""
    return 0 <= token_id < NUM_SPECIAL


def special_id(name: str) -> int:
    """The id of a special token by its name, e.g. `special_id("<think>") == 9`."""
    try:
        return _SPECIAL_ID[name]
    except KeyError:
        raise ConfigError("invalid_argument", f"name={name!r}: not a special token; known: {list(SPECIAL_TOKENS[:18])}") from None


def _check_text(text: str) -> None:
    if not isinstance(text, str):
        raise ConfigError("invalid_argument", f"text={text!r} ({type(text).__name__}): expected str")
    if text.isascii():  # no surrogate can be there (one C pass instead of a Python loop per character)
        return
    for i, ch in enumerate(text):
        cp = ord(ch)
        if 0xD800 <= cp <= 0xDFFF and not (_ESCAPE_LO <= cp <= _ESCAPE_HI):
            raise ConfigError(
                "invalid_argument",
                f"text contains lone surrogate U+{cp:04X} at index {i}; only U+DC80..U+DCFF (escaped raw bytes) are allowed",
            )


def encode_text(text: str) -> list[int]:
    """Plain text -> byte token ids (never special tokens). Raises on lone surrogates outside U+DC80..U+DCFF."""
    _check_text(text)
    return [BYTE_OFFSET + b for b in text.encode("utf-8", "surrogateescape")]


def decode_text(ids: Iterable[int]) -> str:
    """Byte token ids -> text (invalid UTF-8 bytes become U+DC80..U+DCFF). Raises on a special or out-of-range id."""
    buf = bytearray()
    for pos, t in enumerate(ids):
        if not isinstance(t, int) or not (BYTE_OFFSET <= t < VOCAB_SIZE):
            raise ConfigError("invalid_argument", f"ids[{pos}]={t!r}: expected a byte token id in [{BYTE_OFFSET}, {VOCAB_SIZE})")
        buf.append(t - BYTE_OFFSET)
    return bytes(buf).decode("utf-8", "surrogateescape")


def encode(s: str) -> list[int]:
    """Inverse of `decode`: U+D800+k -> special k, everything else as `encode_text`."""
    if not isinstance(s, str):
        raise ConfigError("invalid_argument", f"s={s!r} ({type(s).__name__}): expected str")
    out: list[int] = []
    start = 0
    for i, ch in enumerate(s):
        cp = ord(ch)
        if _SURROGATE_SPECIAL_BASE <= cp < _SURROGATE_SPECIAL_BASE + NUM_SPECIAL:
            out.extend(encode_text(s[start:i]))
            out.append(cp - _SURROGATE_SPECIAL_BASE)
            start = i + 1
    out.extend(encode_text(s[start:]))
    return out


def decode(ids: Iterable[int]) -> str:
    """Any id sequence -> a unique string (specials as U+D800+k); `encode(decode(ids)) == ids`."""
    parts: list[str] = []
    run: list[int] = []
    for pos, t in enumerate(ids):
        check_token_id(t, where=f"ids[{pos}]")
        if t < NUM_SPECIAL:
            parts.append(decode_text(run))
            run = []
            parts.append(chr(_SURROGATE_SPECIAL_BASE + t))
        else:
            run.append(t)
    parts.append(decode_text(run))
    return "".join(parts)


def check_token_id(t: object, *, where: str = "token id") -> int:
    """Return `t` if it is an int id in [0, VOCAB_SIZE); else raise `ConfigError(invalid_argument)`."""
    if isinstance(t, bool) or not isinstance(t, int) or not (0 <= t < VOCAB_SIZE):
        raise ConfigError("invalid_argument", f"{where}={t!r}: expected an int in [0, {VOCAB_SIZE})")
    return t


def token_repr(token_id: int) -> str:
    """Readable, unique name of one id: the special's name, a printable ASCII char, or `<0xNN>`."""
    check_token_id(token_id)
    if token_id < NUM_SPECIAL:
        return SPECIAL_TOKENS[token_id]
    b = token_id - BYTE_OFFSET
    if 0x21 <= b <= 0x7E and chr(b) not in "<>":
        return chr(b)
    return f"<0x{b:02X}>"


def describe(ids: Sequence[int]) -> str:
    """One readable line for a person: specials by name, text bytes decoded where possible."""
    out: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            out.append(repr(decode_text(run)))
            run.clear()

    for t in ids:
        check_token_id(t)
        if t < NUM_SPECIAL:
            flush()
            out.append(SPECIAL_TOKENS[t])
        else:
            run.append(t)
    flush()
    return " ".join(out)


__all__ = [
    "BOS",
    "BYTE_OFFSET",
    "EOS",
    "IMAGE",
    "IMAGE_PATCH_TOKENS",
    "NUM_SPECIAL",
    "PAD",
    "ROLE_ASSISTANT",
    "ROLE_SYSTEM",
    "ROLE_TOOL",
    "ROLE_USER",
    "SPECIAL_TOKENS",
    "THINK_END",
    "THINK_START",
    "TOOL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "TOOL_RESPONSE_END",
    "TOOL_RESPONSE_START",
    "TURN_END",
    "TURN_SEP",
    "TURN_START",
    "VOCAB_SIZE",
    "check_token_id",
    "decode",
    "decode_text",
    "describe",
    "encode",
    "encode_text",
    "is_special",
    "special_id",
    "token_repr",
]
