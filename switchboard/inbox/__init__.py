"""Questions, approvals (and later permission prompts): items that wait on a human."""
