"""The app's other screens: dialogs, runs, journal, settings, live settings, cool down now, help."""
