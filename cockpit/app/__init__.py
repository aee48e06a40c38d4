"""The Textual app: the App and its composed parts (the session, the run's commands, quitting,
switching, opening and starting runs, comparing, the event feed), the main screen, the key table."""
