"""A run's control socket: the wire protocol, the server, the client handle, live-run discovery."""
