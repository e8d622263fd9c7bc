"""The restart chain on the cluster: after an attempt ends, the policy's decision,
the backoff and the next attempt through the sentinels (the main first, the workers once
it is ready), kept in coord/chain.json, resumed by a coordinator started again, and
who succeeds a lost main and when."""
