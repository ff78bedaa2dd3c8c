"""Git hosts' APIs (GitHub, GitLab, Gitea): the one rate-limited HTTP client, where a
repository lives from its URL, and GitHub App authentication. The Git source's credentials
and the check writers above both use them."""
