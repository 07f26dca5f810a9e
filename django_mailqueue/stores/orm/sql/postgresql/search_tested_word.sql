-- A subject word tested on one item row of the probe.
{items}.subject ~* %s
