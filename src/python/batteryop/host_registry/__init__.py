"""The host registry: Nodes become battery's Hosts, and the Host set the Pool controller reads.

A container in the operator Pod beside battery (shared process namespace), in the operator's
shape: `controller` wires it, `inputs` routes what it hears, `loops` runs its watches, and
`inventory` is its one reconcile, a chain of steps (`inventory/reconcile.py`). `admission`
says which Node is a Host, `plan` holds settle time and restart window, `restarter` the one
restart mechanism, `filewatch` the mounts it watches.

Requirements: IN-001..IN-004, IN-010..IN-014, DP-004, DP-006..DP-008.
"""
