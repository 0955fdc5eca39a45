"""The host's facts: sysfs snapshot to Hardware, the hardware file, ports in use."""
