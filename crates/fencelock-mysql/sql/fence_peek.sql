-- ? = resource. The last fence admitted by MySqlFence::admit and committed, if any.
SELECT fence_token, fence_owner FROM {prefix}fences WHERE resource = ? AND fence_token > 0
