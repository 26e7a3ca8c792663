"""The bottom layer: what every other package uses and that imports none of them."""
