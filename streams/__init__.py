"""Pure stream logic: decoding, rates, detection, correlation, inventory. Never imports Faust."""
