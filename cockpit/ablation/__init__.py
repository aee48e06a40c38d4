"""Ablation series (`cockpit ablate`), as pure logic with no Textual and no torch: the spec of a
series (a baseline preset and its changes), its record under runs/ (which run is done, which
resumes), and the table of results read from the runs' metrics files."""
