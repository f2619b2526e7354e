"""The test rig: what several test modules share, and what bench/ drives the function with.

Test modules import from here (and take fixtures from conftest.py); no test module imports another,
and the product (function/, generator/, upgrading/) imports nothing from here.
"""
