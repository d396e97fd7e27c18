"""The Host Image's own programs: what a Host runs at boot that is easier to prove in Python
than in shell, copied into the image under `/usr/lib/battery/python` with `batteryop.hostconf`
and `batteryop.api.names` (standard library only; cloud-init brings Python 3 to every Host).

- `host_env`: reads `/etc/battery/host.conf` with `batteryop.hostconf` (parsed, never
  sourced) and writes `/run/battery/host.env`, the values every unit and script uses, with the
  guest network's derived addresses (HI-037, HI-050, HI-051).
- `kubelet_env`: the kubelet's Node labels and system reserve (HI-060, HI-061, HI-074).

`python3 -m batteryop.hostimage host-env|kubelet-env ...` runs them; the scripts under
`src/images/host/rootfs/usr/libexec/battery` call them and keep the not-ready contract.
"""
