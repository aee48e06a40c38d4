"""The app's other screens: dialogs, runs, journal, settings, help."""
