"""SDS and SDS-R."""
