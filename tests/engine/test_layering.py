import subprocess
import sys


def test_engine_never_imports_textual():
    code = (
        "import sys, engine.train.trainer, engine.telemetry.poller, engine.config.presets, engine.data.preparation;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'cockpit', 'plotext')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_contract_needs_neither_torch_nor_textual():
    # A client of a run in another process (attach) imports the contract and the events only.
    code = (
        "import sys, engine.contract, engine.events;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'textual', 'cockpit')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_command_line_starts_without_the_app_or_torch():
    # Signals are caught from the top of main(): what main's module and the parser import
    # decides how long a SIGTERM at startup kills the process instead (Textual alone is 0.3 s).
    code = (
        "import sys, cockpit.cli; cockpit.cli.build_parser();"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'textual', 'plotext', 'shtab')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
