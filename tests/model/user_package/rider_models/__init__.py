"""A team's own model package, outside trainyard: nothing in ``pipeline_steps`` names it."""
