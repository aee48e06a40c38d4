"""The app's other screens: dialogs, runs, journal, a new run's settings, live settings, help."""
