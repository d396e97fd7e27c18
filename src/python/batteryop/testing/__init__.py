"""Test harnesses and fakes: the real control plane, fake battery, fake flintlockd. Only tests (and the dev stack) import this package."""
