import subprocess
import sys


def test_engine_never_imports_textual():
    code = (
        "import sys, engine.trainer, engine.telemetry, engine.presets, engine.data;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'cockpit', 'plotext')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
