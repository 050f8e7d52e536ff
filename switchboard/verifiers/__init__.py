"""Pure signature schemes.

The rule of this folder: no I/O, no database, no web framework. Bytes, headers and a clock
in; return on success, raise a specific :class:`~switchboard.errors.VerificationFailed`
(or :class:`~switchboard.errors.MalformedRequest` for unparseable headers) out. A verifier never
returns ``False``.
"""
