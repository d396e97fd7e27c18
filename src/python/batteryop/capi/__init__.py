"""Cluster API Host pools (HP-001..HP-031): the renderer of `src/capi`.

A Host pool is a MachineDeployment of bare-metal EC2 instances booting the Host Image and
joining the cluster with kubeadm, with its own AWSMachineTemplate, KubeadmConfigTemplate and
MachineHealthCheck. `src/capi/host-pool` holds the templates, `src/capi/host-pool-params` the
kustomize Component that fills them from a pool's settings, and `src/capi/pools/<pool>` one
folder per pool with its settings. `python -m batteryop.capi` checks the settings and renders
the same objects kustomize would (see `render`), refusing a bad setting with its name.

A development and release tool, not a deployable: no deployable imports it.
"""
