"""The reliability and security suite: fault runs, crashes, bad input, secrets and bounds (docs/reliability.md)."""
