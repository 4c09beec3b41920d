"""A climate-like table (paper 004 section 5.3): latitude, longitude, time, temperature, humidity, pressure.

Values are rounded so a CSV record is about 35 bytes, as in the paper's Table 4.
Deterministic for a given seed; `nulls` sprinkles missing values into humidity
and temperature.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

START = np.datetime64("2020-01-01T00:00:00", "s")


def climate_table(rows: int, seed: int = 0, nulls: bool = False, start: int = 0, compact: bool = False) -> pa.Table:
    """`compact`: time as epoch seconds and humidity in whole percent, so a CSV record is ~37 bytes
    (the paper's ~35); otherwise time is a timestamp column (~45 bytes a record)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(start, start + rows, dtype=np.int64)
    temperature = np.round(rng.normal(12.0, 9.0, rows), 1)
    humidity = np.round(rng.uniform(0.0, 100.0, rows), 0 if compact else 1)
    times = (START + idx * 30).astype(np.int64) if compact else START + idx * 30
    cols = {
        "latitude": pa.array(np.round(rng.uniform(-90.0, 90.0, rows), 1)),
        "longitude": pa.array(np.round(rng.uniform(-180.0, 180.0, rows), 1)),
        "time": pa.array(times) if compact else pa.array(times, type=pa.timestamp("s")),
        "temperature": pa.array(temperature, mask=(rng.random(rows) < 0.05) if nulls else None),
        "humidity": pa.array(
            humidity.astype(np.int16) if compact else humidity, mask=(rng.random(rows) < 0.05) if nulls else None
        ),
        "pressure": pa.array(np.round(rng.normal(1013.0, 8.0, rows)).astype(np.int32)),
    }
    return pa.table(cols)
