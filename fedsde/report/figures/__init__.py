"""One module per figure of the gallery; each exposes ``make(cfg, ctx) -> FigureOutput``."""
