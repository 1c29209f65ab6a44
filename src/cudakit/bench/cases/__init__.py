"""One module per op family; each defines `cases(env) -> list[Case]`."""
