"""Each target's file format: its writer and the checks that read its files back.

`k8s` writes a Deployment and a Service (`k8s_check` reads them back); `systemd` and `quadlet`
write a unit each and read it back beside the writer. Shared: `container` (what a container
runs, for `k8s` and `quadlet`), `ini` (systemd's escaping, for both units), `readback` (a
written argv and env read as the executor reads them, for every target's checks).
"""
