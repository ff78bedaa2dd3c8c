"""Secret shapes for the masking tests: synthetic values in the formats that real
credentials take (vendor tokens, cloud keys, connection strings, webhook URLs, JWTs,
private keys), never real secrets. Each value is built at import from its prefix and a
seeded filler, so that no scanner reads this file as holding a credential and the
values are the same on every run.

`SHAPES`: (label, value) pairs, each secret by its looks alone (its variable is named
`VALUE`, `CONN`, `URL` and the like, nothing secret); `VALUE_ONLY`: the labels of those
that only a whole value betrays. `SECRET_NAMES`: variable names
that hide their value whatever it is. `BENIGN`: values a manifest holds that are no
secrets, which masking must leave as they are.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string

_ALNUM = string.ascii_letters + string.digits
_UPPER = string.ascii_uppercase + string.digits
_LOWER = string.ascii_lowercase + string.digits
_HEX = "0123456789abcdef"
_B64 = _ALNUM + "+/"
_URLSAFE = _ALNUM + "-_"


def fill(alphabet: str, n: int, seed: str) -> str:
    """`n` characters of `alphabet`, the same for the same `seed`."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _jwt(header: dict[str, object], claims: dict[str, object], seed: str) -> str:
    return f"{_b64url(header)}.{_b64url(claims)}.{fill(_URLSAFE, 43, seed)}"


def _pem(label: str, lines: int, seed: str) -> str:
    body = "\n".join(fill(_B64, 64, f"{seed}{i}") for i in range(lines))
    return f"-----BEGIN {label}-----\n{body}\n{fill(_B64, 20, seed)}==\n-----END {label}-----"


def _uuid(seed: str) -> str:
    h = fill(_HEX, 32, seed)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_GH = "gh"  # split so that the file itself holds no token prefix a scanner keys on
_SK = "sk"

SHAPES: list[tuple[str, str]] = [
    # -- version control hosts -------------------------------------------------------
    ("github classic PAT", f"{_GH}p_" + fill(_ALNUM, 36, "ghp")),
    ("github OAuth token", f"{_GH}o_" + fill(_ALNUM, 36, "gho")),
    ("github user-to-server", f"{_GH}u_" + fill(_ALNUM, 36, "ghu")),
    ("github server-to-server", f"{_GH}s_" + fill(_ALNUM, 36, "ghs")),
    ("github refresh token", f"{_GH}r_" + fill(_ALNUM, 36, "ghr")),
    ("github fine-grained PAT", "github_pat_" + fill(_ALNUM, 22, "fg1") + "_"
     + fill(_ALNUM, 59, "fg2")),
    ("gitlab PAT", "glpat-" + fill(_URLSAFE, 20, "glpat")),
    ("gitlab routable PAT", "glpat-" + fill(_ALNUM, 27, "glr") + ".01" + fill(_LOWER, 7, "g")),
    ("gitlab deploy token", "gldt-" + fill(_ALNUM, 20, "gldt")),
    ("gitlab runner token", "glrt-" + fill(_ALNUM, 20, "glrt")),
    ("gitlab pipeline trigger", "glptt-" + fill(_HEX, 40, "glptt")),
    ("gitlab CI job token", "glcbt-64_" + fill(_ALNUM, 20, "glcbt")),
    ("bitbucket app password in a URL", "https://builder:ATBB" + fill(_ALNUM, 28, "atbb")
     + "@bitbucket.org/team/repo.git"),
    # -- chat: tokens and webhooks ---------------------------------------------------
    ("slack bot token", "xoxb-" + fill(string.digits, 12, "s1") + "-"
     + fill(string.digits, 13, "s2") + "-" + fill(_ALNUM, 24, "s3")),
    ("slack user token", "xoxp-" + fill(string.digits, 12, "u1") + "-"
     + fill(string.digits, 12, "u2") + "-" + fill(string.digits, 13, "u3") + "-"
     + fill(_HEX, 32, "u4")),
    ("slack app token", "xapp-1-A" + fill(_UPPER, 10, "xa") + "-"
     + fill(string.digits, 13, "xb") + "-" + fill(_HEX, 64, "xc")),
    ("slack webhook, short", "https://hooks.slack.com/services/T000/B000/XXXX"),
    ("slack webhook", "https://hooks.slack.com/services/T" + fill(_UPPER, 8, "t") + "/B"
     + fill(_UPPER, 10, "b") + "/" + fill(_ALNUM, 24, "w")),
    ("slack workflow webhook", "https://hooks.slack.com/workflows/T" + fill(_UPPER, 8, "wt")
     + "/A" + fill(_UPPER, 10, "wa") + "/" + fill(string.digits, 18, "wd") + "/"
     + fill(_ALNUM, 24, "ws")),
    ("discord webhook", "https://discord.com/api/webhooks/" + fill(string.digits, 18, "d1")
     + "/" + fill(_URLSAFE, 68, "d2")),
    ("discordapp webhook", "https://discordapp.com/api/webhooks/"
     + fill(string.digits, 19, "da1") + "/" + fill(_URLSAFE, 68, "da2")),
    ("discord bot token", "M" + fill(_URLSAFE, 23, "db1") + "." + fill(_URLSAFE, 6, "db2")
     + "." + fill(_URLSAFE, 38, "db3")),
    ("teams webhook", "https://contoso.webhook.office.com/webhookb2/" + _uuid("tw1") + "@"
     + _uuid("tw2") + "/IncomingWebhook/" + fill(_HEX, 32, "tw3") + "/" + _uuid("tw4")),
    ("teams legacy webhook", "https://outlook.office.com/webhook/" + _uuid("tl1") + "@"
     + _uuid("tl2") + "/IncomingWebhook/" + fill(_HEX, 32, "tl3") + "/" + _uuid("tl4")),
    ("teams workflow webhook", "https://prod-12.westus.logic.azure.com:443/workflows/"
     + fill(_HEX, 32, "lw") + "/triggers/manual/paths/invoke?api-version=2016-06-01"
     "&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + fill(_URLSAFE, 43, "lsig")),
    ("mattermost webhook", "https://chat.example.org/hooks/" + fill(_LOWER, 26, "mm")),
    ("google chat webhook", "https://chat.googleapis.com/v1/spaces/AAAA" + fill(_URLSAFE, 7, "gc")
     + "/messages?key=AIza" + fill(_URLSAFE, 35, "gck") + "&token="
     + fill(_URLSAFE, 43, "gct")),
    ("telegram bot token", fill(string.digits, 10, "tg") + ":AA" + fill(_URLSAFE, 33, "tgt")),
    # -- cloud -----------------------------------------------------------------------
    ("aws access key id", "AKIA" + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, "akia")),
    ("aws temporary key id", "ASIA" + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, "asia")),
    ("aws secret access key", fill(_B64, 40, "awssecret")),
    ("aws session token", "IQoJb3JpZ2luX2Vj" + fill(_B64, 300, "awssession")),
    ("aws credentials file", "[default]\naws_access_key_id = AKIA"
     + fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, "akia2")
     + "\naws_secret_access_key = " + fill(_B64, 40, "awss2") + "\n"),
    ("aws bedrock key", "ABSK" + fill(_B64, 120, "absk")),
    ("gcp api key", "AIza" + fill(_URLSAFE, 35, "aiza")),
    ("gcp oauth client secret", "GOCSPX-" + fill(_URLSAFE, 28, "gocspx")),
    ("gcp oauth access token", "ya29.a0" + fill(_URLSAFE, 150, "ya29")),
    ("gcp service account json", json.dumps({
        "type": "service_account", "project_id": "demo-project",
        "private_key_id": fill(_HEX, 40, "pkid"),
        "private_key": _pem("PRIVATE KEY", 8, "gcppk") + "\n",
        "client_email": "runner@demo-project.iam.gserviceaccount.com",
        "client_id": fill(string.digits, 21, "cid"), "token_uri":
        "https://oauth2.googleapis.com/token"}, indent=2)),
    ("gcp service account json, one line", json.dumps({
        "type": "service_account", "private_key_id": fill(_HEX, 40, "pkid2"),
        "private_key": _pem("PRIVATE KEY", 4, "gcppk2")})),
    ("azure storage connection string", "DefaultEndpointsProtocol=https;AccountName=demoacct;"
     "AccountKey=" + fill(_B64, 86, "azsk") + "==;EndpointSuffix=core.windows.net"),
    ("azure storage account key", fill(_B64, 86, "azkey") + "=="),
    ("azure service bus connection string", "Endpoint=sb://demo.servicebus.windows.net/;"
     "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey="
     + fill(_B64, 43, "sbk") + "="),
    ("azure SAS token", "sv=2022-11-02&ss=bfqt&srt=sco&sp=rwdlacupiytfx&se=2030-01-01T00:00:00Z"
     "&st=2024-01-01T00:00:00Z&spr=https&sig=" + fill(_B64, 43, "sas") + "%3D"),
    ("azure SAS URL", "https://demoacct.blob.core.windows.net/data?sv=2022-11-02&sp=r"
     "&sig=" + fill(_B64, 43, "sasu") + "%3D"),
    ("azure AD client secret", fill(_ALNUM, 3, "azad") + "8Q~" + fill(_ALNUM + "_~.", 34, "azad2")),
    ("digitalocean token", "dop_v1_" + fill(_HEX, 64, "dop")),
    ("alibaba access key", "LTAI" + fill(_ALNUM, 20, "ltai")),
    ("heroku api key v2", "HRKU-AA" + fill(_URLSAFE, 58, "hrku")),
    # -- payments, AI, package registries, SaaS --------------------------------------
    ("stripe live secret", f"{_SK}_live_" + fill(_ALNUM, 24, "sl")),
    ("stripe test secret", f"{_SK}_test_" + fill(_ALNUM, 24, "st")),
    ("stripe restricted key", "rk_live_" + fill(_ALNUM, 24, "rl")),
    ("stripe webhook secret", "whsec_" + fill(_ALNUM, 32, "whsec")),
    ("openai project key", f"{_SK}-proj-" + fill(_URLSAFE, 74, "op1") + "T3BlbkFJ"
     + fill(_URLSAFE, 74, "op2")),
    ("openai legacy key", f"{_SK}-" + fill(_ALNUM, 20, "ol1") + "T3BlbkFJ"
     + fill(_ALNUM, 20, "ol2")),
    ("openai key, plain", f"{_SK}-" + fill(_ALNUM, 48, "oplain")),
    ("anthropic key", f"{_SK}-ant-api03-" + fill(_URLSAFE, 93, "ant") + "AA"),
    ("huggingface token", "hf_" + fill(string.ascii_letters, 34, "hf")),
    ("huggingface org token", "api_org_" + fill(string.ascii_letters, 34, "hforg")),
    ("replicate token", "r8_" + fill(_ALNUM, 37, "r8")),
    ("npm token", "npm_" + fill(_ALNUM, 36, "npm")),
    ("pypi token", "pypi-AgEIcHlwaS5vcmc" + fill(_URLSAFE, 70, "pypi")),
    ("docker hub token", "dckr_pat_" + fill(_URLSAFE, 27, "dckr")),
    ("sendgrid key", "SG." + fill(_URLSAFE, 22, "sg1") + "." + fill(_URLSAFE, 43, "sg2")),
    ("twilio api key", "SK" + fill(_HEX, 32, "twilio")),
    ("mailgun key", "key-" + fill(_HEX, 32, "mailgun")),
    ("shopify access token", "shpat_" + fill("0123456789abcdef", 32, "shpat")),
    ("databricks token", "dapi" + fill(_HEX, 32, "dapi")),
    ("postman key", "PMAK-" + fill(_HEX, 24, "pm1") + "-" + fill(_HEX, 34, "pm2")),
    ("linear key", "lin_api_" + fill(_ALNUM, 40, "linear")),
    ("doppler token", "dp.pt." + fill(_ALNUM, 43, "doppler")),
    ("vault token", "hvs." + fill(_URLSAFE, 90, "vault")),
    ("grafana service account token", "glsa_" + fill(_ALNUM, 32, "glsa") + "_"
     + fill(_HEX, 8, "glsa2")),
    ("new relic user key", "NRAK-" + fill(_UPPER, 27, "nrak")),
    ("sentry user token", "sntryu_" + fill(_HEX, 64, "sentry")),
    ("atlassian api token", "ATATT3xFfGF0" + fill(_URLSAFE, 180, "atl")),
    ("age secret key", "AGE-SECRET-KEY-1" + fill("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58, "age")),
    ("1password service account", "ops_eyJ" + fill(_B64, 260, "ops")),
    # -- JWTs and HTTP authorisation ---------------------------------------------------
    ("jwt HS256", _jwt({"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "ci",
                                                        "iat": 1516239022}, "jwt1")),
    ("jwt RS256", _jwt({"alg": "RS256", "kid": "k1"}, {"iss": "https://issuer.example",
                                                       "aud": "nodus", "exp": 1999999999},
                       "jwt2")),
    ("bearer header value", "Bearer " + fill(_URLSAFE, 40, "bearer")),
    ("bearer, short", "Bearer abc123xyz"),
    ("basic header value", "Basic " + base64.b64encode(b"deploy:Wint3r-2024!").decode()),
    ("token header value", "token " + fill(_HEX, 40, "tokhdr")),
    ("authorization header line", "Authorization: Bearer " + fill(_URLSAFE, 32, "authline")),
    ("cookie with session", "session=" + fill(_URLSAFE, 48, "cookie") + "; Path=/; HttpOnly"),
    # -- URLs and connection strings -------------------------------------------------
    ("postgres url", "postgres://u:p@h/db"),
    ("postgresql url", "postgresql://app:Tr0ub4dor3@db.internal:5432/app"),
    ("mysql url", "mysql://root:hunter2@127.0.0.1:3306/shop"),
    ("mongodb srv url", "mongodb+srv://svc:Gh7pQ2xL@cluster0.ab1cd.mongodb.net/?retryWrites=true"),
    ("redis url, password only", "redis://:r3d1sPass@cache:6379/0"),
    ("amqp url", "amqp://guest:s3cretbunny@rabbit:5672/"),
    ("https url with userinfo", "https://ci-bot:pa55word@git.example.com/team/repo.git"),
    ("git url with a token", "https://oauth2:glpat-" + fill(_URLSAFE, 20, "glurl")
     + "@gitlab.com/team/repo.git"),
    ("url with access_token", "https://api.example.com/v1/items?access_token="
     + fill(_ALNUM, 32, "atq")),
    ("url with api_key", "https://maps.example.com/geo?q=x&api_key=" + fill(_HEX, 32, "akq")),
    ("url with token param", "https://dl.example.com/model.bin?token=" + fill(_ALNUM, 24, "tq")),
    ("sql server connection string", "Server=db;User Id=sa;Password=Passw0rd123;"),
    ("ado.net with pwd", "Data Source=tcp:sql1,1433;Initial Catalog=app;User ID=app;pwd=letmein;"),
    ("odbc with PWD", "Driver={ODBC Driver 18 for SQL Server};Server=sql2;UID=etl;PWD={x7!kq};"),
    ("libpq keyword string", "host=db port=5432 dbname=app user=app password=kT9vLz"),
    ("jdbc url with password", "jdbc:mysql://db:3306/app?user=app&password=Sp4rkl3"),
    ("jdbc sqlserver", "jdbc:sqlserver://sql3:1433;databaseName=app;user=sa;password=Mssql!234"),
    ("oracle connect string", "scott/tiger99@//ora.internal:1521/ORCL"),
    # -- private keys ----------------------------------------------------------------
    ("rsa private key", _pem("RSA PRIVATE KEY", 10, "rsa")),
    ("ec private key", _pem("EC PRIVATE KEY", 3, "ec")),
    ("pkcs8 private key", _pem("PRIVATE KEY", 10, "pkcs8")),
    ("encrypted private key", _pem("ENCRYPTED PRIVATE KEY", 10, "enc")),
    ("openssh private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
     + fill(_B64, 40, "ossh0") + "\n" + "\n".join(fill(_B64, 70, f"ossh{i}") for i in range(5))
     + "\n-----END OPENSSH PRIVATE KEY-----"),
    ("dsa private key", _pem("DSA PRIVATE KEY", 8, "dsa")),
    ("pgp private key block", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
     + "\n".join(fill(_B64, 64, f"pgp{i}") for i in range(6))
     + "\n=" + fill(_B64, 4, "pgpcrc") + "\n-----END PGP PRIVATE KEY BLOCK-----"),
    ("putty private key", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n"
     "Comment: ci\nPublic-Lines: 2\n" + fill(_B64, 64, "pp1") + "\n" + fill(_B64, 20, "pp2")
     + "\nPrivate-Lines: 1\n" + fill(_B64, 44, "pp3") + "\nPrivate-MAC: "
     + fill(_HEX, 64, "pp4")),
    ("private key, escaped line breaks", _pem("RSA PRIVATE KEY", 6, "rsaesc").replace("\n", "\\n")),
    # -- long random strings of no known vendor ------------------------------------------
    ("random base64, 44", fill(_B64, 43, "rb64") + "="),
    ("random urlsafe, 64", fill(_URLSAFE, 64, "rurl")),
    ("django secret key", "django-insecure-" + fill(_ALNUM + "!@#$%^&*(-_=+)", 50, "dj")),
    ("fernet key", base64.urlsafe_b64encode(random.Random("fernet").randbytes(32)).decode()),
]

# Shapes that only a whole value betrays (one long high-entropy token): hidden as an env
# value or a line of its own, not when written among other words. Shapes that nothing
# betrays but a name (40 or 64 hex digits, as a W&B key or a digest is; 52 lower-case
# base32 letters, as an Azure DevOps token is) are not here: by their looks they are
# commits and digests.
VALUE_ONLY = {
    "aws secret access key", "aws session token", "azure storage account key",
    "random base64, 44", "random urlsafe, 64", "fernet key",
}

# Names whose values are hidden whatever they hold.
SECRET_NAMES = [
    "MYSQL_PWD", "PW", "PWD_DB", "DB_PW", "ADMIN_PIN", "PIN", "SIM_PIN", "PASSWORD",
    "PASS", "PASSWD", "PASSCODE", "SMTP_PASSWD", "DB_PASS", "REDIS_PASS", "PASSPHRASE",
    "SECRET", "CLIENT_SECRET", "JWT_SECRET", "SECRETS_JSON", "TOKEN", "GH_TOKEN",
    "HF_TOKEN", "ACCESS_TOKEN", "TOKENS", "API_KEY", "APIKEY", "OPENAI_API_KEY",
    "SSH_KEY", "ENCRYPTION_KEY", "SIGNING_KEY", "AWS_SECRET_ACCESS_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON", "CREDENTIALS", "AWS_CREDENTIALS", "CREDS",
    "AUTH", "BASIC_AUTH", "COOKIE", "SESSION_COOKIE", "PRIVATE_KEY", "CERT_KEY",
    "WEBHOOK_URL", "SLACK_WEBHOOK", "SLACK_HOOK", "TEAMS_WEBHOOK", "SALT",
    "mysql_pwd", "db.password", "api-key", "dbPassword", "awsSecretAccessKey",
]

# Names of no secret: their values are judged by their looks alone.
BENIGN_NAMES = [
    "PWD", "OLDPWD", "PIN_MEMORY", "BATCH_SIZE", "LOG_LEVEL", "DATABASE_HOST",
    "BYPASS_CACHE", "SPINNER", "COMPASS_HEADING", "NODUS_PARAM_BATCH_SIZE",
]

# Values a manifest holds that are no secrets: shown as written.
BENIGN = [
    "debug", "info", "0", "1", "true", "false", "/nodus/outputs", "/data/cache",
    "python3", "nodus/pytorch", "python:3.12-slim", "en_US.UTF-8", "UTC", "0,1,2,3",
    "ghcr.io/acme/trainer:1.4.2",
    "ghcr.io/acme/trainer@sha256:" + fill(_HEX, 64, "digest"),
    "0123456789abcdef0123456789abcdef01234567",  # a commit
    _uuid("run-id"),
    "s3://acme-datasets/imagenet/train/",
    "gs://acme-models/checkpoints/step-1000/",
    "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct",
    "https://pypi.org/simple", "https://example.com/data.csv?page=2&sort=name",
    "http://localhost:8080/metrics", "postgres://db.internal:5432/app",
    "meta-llama/Llama-3.1-8B-Instruct", "bert-base-uncased", "gpt2-medium",
    "facebook/opt-350m", "stabilityai/stable-diffusion-xl-base-1.0",
    "--learning-rate=3e-4", "--sort-key=name", "--max-steps 1000", "--token-budget=4096",
    "torchrun --nproc_per_node=8 train.py --config configs/llama.yaml",
    "CUDA_VISIBLE_DEVICES=0,1", "PYTHONPATH=/app/src", "expandable_segments:True",
    "max_split_size_mb:512", "NCCL_DEBUG=INFO", "eth0", "^docker0,lo",
    "The quick brown fox jumps over the lazy dog", "batch-size-3", "train-eval",
    "L4", "A10", "H100", "512Mi", "10m", "0.25", "3e-4", "1e-5", "bf16",
    "tokenizer.json", "key_value_cache", "primary_key", "sort_keys=True",
    "password-reset-email.html", "auth.example.com", "secrets-manager",
    "monkey", "keyboard", "turkey-sandwich",
]

_AFTER = ("/services/", "/workflows/", "/webhooks/", "/webhookb2/", "/webhook/", "/hooks/")
_PARAM = re.compile(r"(?i)(?:[?&;]|^)(?:access_token|api_key|token|key|sig|password|pwd|"
                    r"accountkey|sharedaccesskey)=([^&;\s]+)")


def secret_parts(value: str) -> list[str]:
    """What of `value` must never be shown, read with plain string operations (not the
    rules under test): a key's body lines, a URL's password, a webhook URL's path, a
    parameter's value, the credential after `Bearer`; else the whole value."""
    if "PRIVATE KEY" in value or "PuTTY" in value:
        lines = value.replace("\\n", "\n").splitlines()
        if "PuTTY" in value:
            lines = lines[lines.index(next(x for x in lines if x.startswith("Private-Lines")))
                          + 1:]
        return [x.split('"')[0] for x in lines if len(x) >= 16 and "-----" not in x
                and ":" not in x]
    if "aws_secret_access_key" in value:
        return [line.split(" = ")[1] for line in value.splitlines() if " = " in line]
    for marker in _AFTER:
        if marker in value and "://" in value:
            return [value.split(marker, 1)[1].split("?")[0]]
    if "logic.azure.com" in value or "sig=" in value:
        return [value.split("sig=", 1)[1]]
    params = [m.group(1) for m in _PARAM.finditer(value)]
    if params:
        return params
    if "://" in value and "@" in value.split("://", 1)[1]:
        return [":" + value.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1] + "@"]
    if "@//" in value:
        return [value.split("/", 1)[1].split("@", 1)[0]]
    first, _, rest = value.partition(" ")
    if first.lower() in ("bearer", "basic", "token", "authorization:") and rest:
        return [rest.rsplit(" ", 1)[-1]]
    if value.startswith("session="):
        return [value.split("=", 1)[1].split(";")[0]]
    return [value]
