"""The Textual app: the App, the main screen, the key table, actions, the run on screen."""
