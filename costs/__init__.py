"""What generation costs on this device: measured, estimated and bounded below (costs/README.md)."""
