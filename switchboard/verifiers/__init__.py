"""Pure signature schemes.

The rule of this folder: no I/O, no database, no web framework. Bytes, headers and a clock
in; return on success, raise a specific :class:`~switchboard.errors.VerificationFailed`
(or :class:`~switchboard.errors.MalformedRequest` for unparseable headers) out. A verifier never
returns ``False``, never logs, and never puts a secret or a signature into an error message.

The reasons shared by every scheme live here::

    VerificationFailed (signature_invalid, 401)
    ├── SignatureMissing        a header the scheme needs is absent or empty
    ├── SignatureMismatch       no configured secret or key produces the signature
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
