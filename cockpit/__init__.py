"""cockpit: a terminal cockpit for training small GPT models: the `cockpit` command and its Textual app.

It drives the engine through engine.contract and reads what runs report through engine.events.
"""
