"""One `nudge run`: its configuration, validation, preparation, units and runner."""
