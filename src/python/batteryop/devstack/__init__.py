"""The local stack: the whole system on one machine, each component a process of its own.

`./pants run src/python/batteryop/devstack` (see `main`). The end-to-end tests (`tests/e2e`)
run the same `stack.Stack`.
"""
