"""Pure signature schemes.

Rule: imports only ``errors`` (and a ``Clock``); imported only by ``sources``. A new scheme
is a module here, named after the scheme; an adapter in ``sources/`` calls it.

The rule of this folder: no I/O, no database, no web framework. Bytes, headers and a clock
in; return on success, raise a specific :class:`~switchboard.errors.VerificationFailed` out.
A credential header that does not even parse is a verification failure too (401, never 400):
Discord's endpoint checker sends malformed signatures on purpose and removes endpoints that do
not answer 401, and an attacker learns nothing from the shape of the refusal (issue 12 #1). A verifier never
returns ``False``, never logs, and never puts a secret or a signature into an error message.

The reasons shared by every scheme live here::

    VerificationFailed (signature_invalid, 401)
    ├── SignatureMissing        a header the scheme needs is absent or empty
    ├── SignatureMismatch       no configured secret or key produces the signature
    ├── SignatureMalformed      a signature, token or timestamp header does not parse
    └── TimestampOutOfWindow    the signed timestamp is too old or too far ahead
"""
from __future__ import annotations

from switchboard.errors import VerificationFailed


class SignatureMissing(VerificationFailed):
    """The signature header is missing."""


class SignatureMismatch(VerificationFailed):
    """No configured secret produces this signature."""


class TimestampOutOfWindow(VerificationFailed):
    """The signed timestamp is outside the replay window."""


class SignatureMalformed(VerificationFailed):
    """A signature, token or timestamp header is not in the scheme's syntax."""
