"""Credentials in ``storage_options`` stay out of checkpoints.

Checkpoints travel: to shared storage, to colleagues, to model hubs. So the copy of
``storage_options`` that goes into a checkpoint's hyperparameters leaves out every value whose
key names a credential (``key``, ``secret``, ``token``, ``password``, ``*_key``,
``*_secret``, ``*_token``, ``Authorization`` headers, ...), at any depth, and records which
keys it left out under :data:`NOT_SAVED`. A module rebuilt from the checkpoint
(``load_from_checkpoint``) warns that they are missing: pass ``storage_options=`` again, or
let fsspec find the credentials in the environment (``AWS_ACCESS_KEY_ID``, a profile...).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = [
    "NOT_SAVED",
    "checkpoint_storage_options",
    "is_credential",
    "restored_storage_options",
    "save_without_credentials",
    "without_credentials",
]

#: The key, in a checkpoint's ``storage_options``, listing the credentials left out.
NOT_SAVED = "__not_saved__"

_CREDENTIAL = re.compile(
    r"^(key|secret|token|password|passwd|auth|authorization|credentials?|cookie)$"
    r"|(_key|_secret|_token|_password|_credentials?)$|connection_string|x-api-key",
    re.IGNORECASE,
)


def is_credential(key: str) -> bool:
    """Whether an option named ``key`` holds a credential."""
    return bool(_CREDENTIAL.search(key))


def without_credentials(options: Mapping[str, Any], prefix: str = "") -> tuple[dict, list[str]]:
    """A copy of ``options`` without credentials, and the dotted names of those left out."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in options.items():
        name = f"{prefix}{key}"
        if isinstance(key, str) and is_credential(key):
            dropped.append(name)
        elif isinstance(value, Mapping):
            kept[key], inner = without_credentials(value, f"{name}.")
            dropped.extend(inner)
        else:
            kept[key] = value
    return kept, dropped


def checkpoint_storage_options(options: Mapping[str, Any] | None) -> tuple[Any, list[str]]:
    """``storage_options`` as checkpoints keep them, and the credentials left out."""
    if not isinstance(options, Mapping) or not options:
        return options, []
    kept, dropped = without_credentials(options)
    if dropped:
        kept[NOT_SAVED] = dropped
    return kept, dropped


def save_without_credentials(module: Any, options: Any) -> None:
    """Replaces ``module``'s saved ``storage_options`` with a copy without credentials, and
    lists those left out in ``module.unsaved_arguments`` (as ``storage_options.NAME``)."""
    from datamodules.core.hparams import set_hparam

    saved, credentials = checkpoint_storage_options(options)
    if credentials and "storage_options" in module.hparams:  # not when a subclass fixes them
        set_hparam(module, "storage_options", saved)
        for name in credentials:
            module.unsaved_arguments[f"storage_options.{name}"] = "a credential"


def restored_storage_options(options: Any) -> Any:
    """``storage_options`` as given, without the :data:`NOT_SAVED` marker of a checkpoint.

    Warns when the marker is there, naming the credentials the checkpoint did not keep.
    """
    if not isinstance(options, Mapping) or NOT_SAVED not in options:
        return options  # checked by the caller
    options = dict(options)
    missing = options.pop(NOT_SAVED)
    warnings.warn(
        f"storage_options: the checkpoint does not hold the credentials {missing} (they are "
        "never saved): pass storage_options=... to load_from_checkpoint(), or let fsspec find "
        "them in the environment.",
        UserWarning,
        stacklevel=3,
    )
    return options
