"""The `cockpit` command: argument parsing, launch helpers, one module per subcommand."""
