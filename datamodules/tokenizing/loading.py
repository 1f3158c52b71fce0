"""A tokenizer named by its path, as a command line or a config file gives it.

``--data.tokenizer PATH`` (``python -m datamodules inspect``, LightningCLI) and
``tokenizer: PATH`` in a YAML config hand a DataModule a string. :func:`load_tokenizer` turns
a path to a saved tokenizer into the tokenizer, from local files only (nothing is downloaded):

* a folder written by ``save_pretrained`` (with ``tokenizer_config.json``): the
  ``transformers`` tokenizer that ``AutoTokenizer.from_pretrained(folder)`` loads, with its
  special tokens and chat template;
* a folder holding only a ``tokenizer.json``, or a ``*.json`` file: the
  ``tokenizers.Tokenizer`` that ``Tokenizer.from_file`` loads (it has no chat template and
  no special-token roles: give ``chat_template=`` and, for prompt/completion strings,
  ``eos_token=``).

Anything else is returned as it is, for the DataModule's own checks.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["load_tokenizer", "names_a_tokenizer_file"]


def names_a_tokenizer_file(value: Any) -> bool:
    """Whether ``value`` is a path (str or PathLike) to a folder or to a ``.json`` file."""
    if not isinstance(value, (str, os.PathLike)):
        return False
    path = os.fspath(value)
    return os.path.isdir(path) or path.endswith(".json")


def load_tokenizer(value: Any, name: str = "tokenizer", words: tuple[str, ...] = ()) -> Any:
    """The tokenizer saved at ``value`` when it is a path (see the module), else ``value``.

    Args:
        value: A tokenizer object, a path to a saved one, or any other value (returned as it
            is).
        name: The argument's name, for errors.
        words: Strings that name something else (text's ``"char"`` and ``"word"``), never a
            path.

    Raises:
        FileNotFoundError: A ``.json`` path that does not exist, or a folder with neither
            ``tokenizer_config.json`` nor ``tokenizer.json``, named.
    """
    if value in words or not names_a_tokenizer_file(value):
        return value
    path = os.fspath(value)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "tokenizer_config.json")):
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        file = os.path.join(path, "tokenizer.json")
        if not os.path.exists(file):
            raise FileNotFoundError(
                f"{name}={value!r}: the folder holds neither tokenizer_config.json (a "
                "transformers tokenizer's save_pretrained) nor tokenizer.json (a tokenizers "
                "Tokenizer's save)."
            )
        path = file
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{name}={value!r}: no such file; give a tokenizer.json file or a folder saved by "
            "save_pretrained."
        )
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)
