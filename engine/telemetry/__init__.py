"""Machine telemetry: NVML and psutil backends behind one interface, the poller, throttle reasons."""
