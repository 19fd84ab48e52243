"""The README's Python example runs and its check passes."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_passes(capsys):
    text = README.read_text()
    section = text[text.index("## From Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    env = {}
    exec(compile(code, "README.md", "exec"), env)
    assert env["report"].ok
    assert capsys.readouterr().out.rstrip().endswith("PASS")
