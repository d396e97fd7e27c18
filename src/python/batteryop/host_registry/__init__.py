"""The host registry: Nodes become battery's Hosts, and the Host set the Pool controller reads.

A container in the operator Pod beside battery (shared process namespace). See `controller`
for the reconcile, `admission` for which Node is a Host, `plan` for settle time and restart
window, `restarter` for the one restart mechanism, `filewatch` for the mounts it watches.

Requirements: IN-001..IN-004, IN-010..IN-014, DP-004, DP-006..DP-008.
"""
