"""XProf's terms: its op-profile numbers, XSpace files written for it, a real profile's programs
predicted against it."""
