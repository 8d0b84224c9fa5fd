"""Tasks: harbor task directories (`task`), the parquet task index (`index`, columns in
`schema`) and the seeded, epoch-aware sampler with difficulty filters (`sampler`)."""
