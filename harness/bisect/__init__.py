"""``harness bisect``: the first commit where a metric regressed (search, git worktrees, runs)."""
