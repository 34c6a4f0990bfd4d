"""A three-row Python streaming data source of no relation to spark_groups, in a streaming
table: enough for spark-pipelines on pyspark 4.2/4.3 to exit 1 after a completed run."""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

spark = SparkSession.active()


class TinyReader(SimpleDataSourceStreamReader):
    def initialOffset(self):
        return {"n": 0}

    def read(self, start):
        if start["n"] >= 3:
            return iter([]), start
        return iter([(i,) for i in range(start["n"], 3)]), {"n": 3}

    def readBetweenOffsets(self, start, end):
        return iter([(i,) for i in range(start["n"], end["n"])])


class TinySource(DataSource):
    @classmethod
    def name(cls):
        return "tiny"

    def schema(self):
        return "id int"

    def simpleStreamReader(self, schema):
        return TinyReader()


spark.dataSource.register(TinySource)


@dp.table
def tiny_events():
    return spark.readStream.format("tiny").load()
