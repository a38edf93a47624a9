"""README's "What ships" table says how many rows autotune/db/shipped.sqlite holds per kernel, GPU and dtype, and its
total: both must be what the file holds (read-only), so shipping rows means updating the table."""

import pathlib
import re
import sqlite3

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "autotune" / "db" / "shipped.sqlite"


def shipped_counts() -> dict[tuple[str, str, str], int]:
    with sqlite3.connect(f"file:{SHIPPED}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT kernel, gpu, dtype, COUNT(*) FROM best_configs GROUP BY kernel, gpu, dtype")
        return {(kernel, gpu, dtype): n for kernel, gpu, dtype, n in rows}


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## What ships", 1)[1].split("\n## ", 1)[0]


def readme_counts() -> dict[tuple[str, str, str], int]:
    lines = [line for line in readme_section().splitlines() if line.startswith("|")]
    columns = [cell.strip().split() for cell in lines[0].strip("|").split("|")[1:]]  # ["H100", "bf16"], ...
    counts = {}
    for line in lines[2:]:
        kernel, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        for (gpu, dtype), cell in zip(columns, cells):
            if cell != "-":
                counts[(kernel.strip("`"), gpu, dtype)] = int(cell)
    return counts


def test_the_readme_table_counts_the_shipped_rows_per_kernel_gpu_and_dtype():
    assert readme_counts() == shipped_counts()


def test_the_readme_states_the_shipped_total():
    total = sum(shipped_counts().values())
    assert re.search(rf"holds {total} rows", readme_section()), f"README should say the file holds {total} rows"
