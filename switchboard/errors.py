"""The error tree. Every class carries a stable ``code`` and an HTTP ``status``.

Each surface renders errors in one place: the ASGI/Flask layer turns them into RFC 9457
problem details, the MCP layer into tool errors ``{code, message, retryable}``
(DESIGN.md §6.1, §6.3). A class's docstring is its default message.

::

    SwitchboardError (internal, 500)
    ├── InvalidArgument (invalid_argument, 400)
    │   ├── MalformedRequest (malformed_request, 400)     a header the scheme needs is unparseable
    │   └── MalformedPayload (malformed_payload, 400)     verified body that does not parse
    ├── Unauthenticated (unauthenticated, 401)
    │   └── VerificationFailed (signature_invalid, 401)   bad/missing signature, stale timestamp
    ├── Forbidden (forbidden, 403)
    │   └── HumanApprovalRequired (human_approval_required, 403)   needs a bound human decision
    ├── NotFound (not_found, 404)
    ├── Conflict (conflict, 409)
    ├── PayloadTooLarge (payload_too_large, 413)
    ├── RateLimited (rate_limited, 429)
    ├── SourceUnconfigured (source_unconfigured, 503)   a source with no secret refuses everything
    ├── DependencyUnavailable (dependency_unavailable, 503)
    └── ConfigError (config_invalid, 500)              invalid settings; stops start-up
"""

from __future__ import annotations


class SwitchboardError(Exception):
    """Internal error."""

    code: str = "internal"
    status: int = 500
    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__class__.__doc__ or self.code).strip().splitlines()[0]
        super().__init__(self.message)


class InvalidArgument(SwitchboardError):
    """The request or an argument is invalid."""

    code = "invalid_argument"
    status = 400


class MalformedRequest(InvalidArgument):
    """A header the verification scheme needs is malformed."""

    code = "malformed_request"


class MalformedPayload(InvalidArgument):
    """The verified body could not be parsed."""

    code = "malformed_payload"


class Unauthenticated(SwitchboardError):
    """Authentication is required."""

    code = "unauthenticated"
    status = 401


class VerificationFailed(Unauthenticated):
    """The delivery's signature could not be verified."""

    code = "signature_invalid"


class Forbidden(SwitchboardError):
    """The caller may not do this."""

    code = "forbidden"
    status = 403


class HumanApprovalRequired(Forbidden):
    """This needs a human's decision first."""

    code = "human_approval_required"


class NotFound(SwitchboardError):
    """Not found."""

    code = "not_found"
    status = 404


class Conflict(SwitchboardError):
    """The operation conflicts with the current state."""

    code = "conflict"
    status = 409


class PayloadTooLarge(SwitchboardError):
    """The request body is over the size limit."""

    code = "payload_too_large"
    status = 413


class RateLimited(SwitchboardError):
    """Too many requests; retry later."""

    code = "rate_limited"
    status = 429
    retryable = True


class SourceUnconfigured(SwitchboardError):
    """This source has no verification secret and refuses every delivery."""

    code = "source_unconfigured"
    status = 503


class DependencyUnavailable(SwitchboardError):
    """A backing service (database, Redis) is unavailable."""

    code = "dependency_unavailable"
    status = 503
    retryable = True


class ConfigError(SwitchboardError):
    """The configuration is invalid."""

    code = "config_invalid"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
