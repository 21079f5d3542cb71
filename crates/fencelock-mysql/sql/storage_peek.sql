-- ? = resource. The value and last admitted fence, without fencing.
SELECT value, fence_token, fence_owner FROM {prefix}storage WHERE resource = ?
