"""Replay benchmarks (issue 4): verify and recover over many sessions, verify MB/s, state_at."""

from __future__ import annotations
