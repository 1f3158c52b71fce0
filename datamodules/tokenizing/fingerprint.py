"""A tokenizer's fingerprint: what identifies it in a token store's key, in every process.

One function for every kind that keys a store by its tokenizer (text's token store, chat's
rendered conversations).
"""

from __future__ import annotations

from typing import Any

__all__ = ["tokenizer_fingerprint"]


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, str]:
    """What identifies a tokenizer for the token store: its class and a hash of its state.

    The state is, by preference: the serialized tokenizer (``to_str()`` of a Hugging Face
    ``tokenizers.Tokenizer``, or a ``transformers`` tokenizer's ``backend_tokenizer``); its
    vocabulary (``get_vocab()``); a function's code, constants and closure; else the object
    pickled. Two tokenizers with the same fingerprint give the same ids.
    """
    import hashlib
    import json
    import pickle

    kind = type(tokenizer)
    name = f"{kind.__module__}.{kind.__qualname__}"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if hasattr(tokenizer, "to_str"):
        state = tokenizer.to_str().encode()
    elif backend is not None and hasattr(backend, "to_str"):
        specials = getattr(tokenizer, "special_tokens_map", {})
        state = (backend.to_str() + json.dumps(specials, sort_keys=True, default=str)).encode()
    elif callable(getattr(tokenizer, "get_vocab", None)):
        state = json.dumps(sorted(tokenizer.get_vocab().items()), default=str).encode()
    elif hasattr(tokenizer, "__code__"):
        code = tokenizer.__code__
        cells = tuple(c.cell_contents for c in (tokenizer.__closure__ or ()))
        name = f"{tokenizer.__module__}.{tokenizer.__qualname__}"
        state = code.co_code + repr((code.co_consts, code.co_names, cells)).encode()
    else:
        try:
            state = pickle.dumps(tokenizer, protocol=4)
        except Exception:  # noqa: BLE001 - an object that does not pickle: its repr
            state = repr(tokenizer).encode()
    return {"class": name, "state": hashlib.sha256(state).hexdigest()}
